from .callbacks import EntropyScheduleCallback
from .controllers import AdaptiveClipController, LambdaStepController, PIController
from .schedules import (
    CallableSchedule,
    ConstantSchedule,
    CosineSchedule,
    EntropySchedule,
    LinearSchedule,
    WSDSchedule,
    make_schedule,
)

__all__ = [
    "AdaptiveClipController",
    "LambdaStepController",
    "PIController",
    "CallableSchedule",
    "ConstantSchedule",
    "CosineSchedule",
    "EntropySchedule",
    "EntropyScheduleCallback",
    "LinearSchedule",
    "WSDSchedule",
    "make_schedule",
]
