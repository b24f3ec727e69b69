from .callbacks import EntropyScheduleCallback
from .curriculum import AnnealingCurriculumCallback, CurriculumDataset, CurriculumSampler
from .controllers import AdaptiveClipController, LambdaStepController
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
    "AnnealingCurriculumCallback",
    "CurriculumDataset",
    "CurriculumSampler",
    "AdaptiveClipController",
    "LambdaStepController",
    "CallableSchedule",
    "ConstantSchedule",
    "CosineSchedule",
    "EntropySchedule",
    "EntropyScheduleCallback",
    "LinearSchedule",
    "WSDSchedule",
    "make_schedule",
]
