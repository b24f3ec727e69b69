from .callbacks import EntropyScheduleCallback
from .bonus import AuthorityEstimator, EntropyBonusController
from .controllers import (
    AdaptiveClipController,
    LambdaStepController,
    PIController,
    SaturationMonitor,
)
from .curriculum import AnnealingCurriculumCallback, CurriculumDataset, CurriculumSampler
from .measurement import (
    entropy_sums,
    generation_batch_entropy,
    global_token_mean,
    signal_token_count,
)
from .schedules import (
    CallableSchedule,
    ConstantSchedule,
    CosineSchedule,
    EntropySchedule,
    LinearSchedule,
    WSDSchedule,
    make_schedule,
    schedule_label,
)

__all__ = [
    "AnnealingCurriculumCallback",
    "CurriculumDataset",
    "CurriculumSampler",
    "AdaptiveClipController",
    "AuthorityEstimator",
    "EntropyBonusController",
    "LambdaStepController",
    "PIController",
    "SaturationMonitor",
    "CallableSchedule",
    "ConstantSchedule",
    "CosineSchedule",
    "EntropySchedule",
    "EntropyScheduleCallback",
    "LinearSchedule",
    "WSDSchedule",
    "make_schedule",
    "schedule_label",
    "entropy_sums",
    "generation_batch_entropy",
    "global_token_mean",
    "signal_token_count",
]
