import math

import pytest

from trl_entropy.scheduling import (
    CallableSchedule,
    ConstantSchedule,
    CosineSchedule,
    LinearSchedule,
    WSDSchedule,
    make_schedule,
)


def test_constant():
    s = ConstantSchedule(start=0.4)
    assert [s(t, 100) for t in (0, 50, 99, 100)] == [0.4] * 4
    assert s.phase(10, 100) == "stable"


def test_linear_known_values():
    # 101 steps: step 0 is the first, step 100 the last, so p = step / 100
    s = LinearSchedule(start=0.6, end=0.2)
    assert s(0, 101) == pytest.approx(0.6)
    assert s(25, 101) == pytest.approx(0.5)
    assert s(50, 101) == pytest.approx(0.4)
    assert s(100, 101) == pytest.approx(0.2)
    assert s(150, 101) == pytest.approx(0.2)  # clipped after the end


def test_linear_with_warmup():
    s = LinearSchedule(start=1.0, end=0.0, warmup_steps=20)
    assert s(0, 121) == 1.0 and s(19, 121) == 1.0
    assert s(20, 121) == pytest.approx(1.0)
    assert s(70, 121) == pytest.approx(0.5)
    assert s(120, 121) == pytest.approx(0.0)
    assert s.phase(5, 121) == "warmup" and s.phase(50, 121) == "anneal"


def test_cosine_known_values():
    s = CosineSchedule(start=0.6, end=0.2)
    assert s(0, 101) == pytest.approx(0.6)
    assert s(50, 101) == pytest.approx(0.4)
    assert s(25, 101) == pytest.approx(0.2 + 0.4 * 0.5 * (1 + math.cos(math.pi / 4)))
    assert s(100, 101) == pytest.approx(0.2)


def test_wsd_known_values():
    s = WSDSchedule(start=0.5, end=0.1, anneal_ratio=0.2, warmup_steps=10)
    # anneal starts at 100 - 20 = 80 and ends on the last step, 99: p = (step - 80) / 19
    assert s.anneal_start(100) == 80
    assert s(0, 100) == 0.5 and s(50, 100) == 0.5 and s(80, 100) == pytest.approx(0.5)
    assert s(89, 100) == pytest.approx(0.5 - 0.4 * 9 / 19)
    assert s(99, 100) == pytest.approx(0.1)
    assert [s.phase(t, 100) for t in (5, 50, 85)] == ["warmup", "stable", "anneal"]


@pytest.mark.parametrize("total", [1, 2, 3, 7, 10, 100])
@pytest.mark.parametrize(
    "schedule",
    [
        LinearSchedule(start=0.6, end=0.2),
        CosineSchedule(start=0.6, end=0.2),
        WSDSchedule(start=0.6, end=0.2, anneal_ratio=0.1),
        WSDSchedule(start=0.6, end=0.2, anneal_ratio=0.01),  # round(0.01 * total) = 0: still one annealing step
        LinearSchedule(start=0.6, end=0.2, warmup_steps=1),
    ],
)
def test_the_last_optimizer_step_sees_the_end(schedule, total):
    """The trainer evaluates the schedule at global_step = 0 .. total - 1: the last step must train with `end`."""
    if schedule.warmup_steps >= total:
        return
    assert schedule(total - 1, total) == pytest.approx(0.2)
    assert all(schedule(t, total) >= schedule(t + 1, total) - 1e-12 for t in range(total - 1))  # never rises
    assert schedule.phase(total - 1, total) == "anneal"


def test_end_none_means_start():
    assert LinearSchedule(start=0.3)(70, 100) == pytest.approx(0.3)


def test_callable_schedule_and_checks():
    s = make_schedule(lambda step, total: 1.0 - step / total)
    assert isinstance(s, CallableSchedule)
    assert s(25, 100) == pytest.approx(0.75)
    bad = make_schedule(lambda step, total: -1.0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        bad(0, 10)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(name="exp", start=0.1), "entropy_schedule must be one of"),
        (dict(name="linear", start=None), "entropy_schedule_start must be set"),
        (dict(name="linear", start=-0.1), "entropy_schedule_start"),
        (dict(name="linear", start=0.1, end=-1.0), "entropy_schedule_end"),
        (dict(name="linear", start=0.1, warmup_steps=-1), "entropy_schedule_warmup_steps"),
        (dict(name="wsd", start=0.1, anneal_ratio=0.0), "entropy_schedule_anneal_ratio"),
        (dict(name="wsd", start=0.1, anneal_ratio=1.5), "entropy_schedule_anneal_ratio"),
    ],
)
def test_make_schedule_errors(kwargs, match):
    name = kwargs.pop("name")
    with pytest.raises(ValueError, match=match):
        make_schedule(name, **kwargs)


def test_total_steps_must_be_positive():
    with pytest.raises(ValueError, match="total_steps"):
        LinearSchedule(start=0.1)(0, 0)


def _decay(step, total, end=0.1):
    return max(end, 1.0 - step / total)


class _Stepper:
    def __call__(self, step, total):
        return 0.5

    def value(self, step, total):
        return 0.5


def test_schedule_label_is_readable_for_every_kind_of_callable():
    import functools

    from trl_entropy.scheduling import schedule_label

    assert schedule_label(_decay) == "_decay"
    assert schedule_label(lambda s, t: 1.0).startswith("lambda (test_schedules.py:")
    assert schedule_label(functools.partial(_decay, end=0.2)) == "functools.partial(_decay, end=0.2)"
    assert schedule_label(_Stepper()) == "_Stepper instance"
    assert schedule_label(_Stepper().value) == "_Stepper.value"
    assert schedule_label(LinearSchedule(start=0.6, end=0.2)) == "LinearSchedule(start=0.6, end=0.2, warmup_steps=0)"
    assert schedule_label(make_schedule(_decay)) == "_decay"  # the wrapper is transparent
    for fn in (_decay, functools.partial(_decay, end=0.2), _Stepper()):
        assert "0x" not in schedule_label(fn)


def test_every_list_of_schedule_names_is_the_schedules_registry():
    """The named schedules are SCHEDULES' keys: the config's choices and help, the demo's torch-free choices and the
    model card's formulas list the same names."""
    from trl_entropy import GRPOEntropyConfig, cli
    from trl_entropy.model_card import SCHEDULE_FORMULAS
    from trl_entropy.scheduling.schedules import SCHEDULES
    from trl_entropy.trainers.grpo_entropy_config import SCHEDULE_NAMES

    names = list(SCHEDULES)
    field = GRPOEntropyConfig.__dataclass_fields__["entropy_schedule"]
    assert list(SCHEDULE_NAMES) == names and list(field.metadata["choices"]) == names
    assert all(repr(name) in field.metadata["help"] for name in names)
    assert list(cli.DEMO_SCHEDULES) == names and dict(cli.demo_flags())["schedule"]["choices"] == cli.DEMO_SCHEDULES
    assert list(SCHEDULE_FORMULAS) == names
