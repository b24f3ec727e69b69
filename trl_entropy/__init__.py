"""trl-entropy: policy entropy as a schedulable training hyperparameter for GRPO in Hugging Face TRL."""

__version__ = "0.1.0"

from .evaluation import EntropyPerformanceFitCallback, EntropyPlotCallback, PassAtKCallback
from .scheduling import AnnealingCurriculumCallback, EntropyScheduleCallback, make_schedule
from .trainers import GRPOEntropyConfig, GRPOEntropyTrainer

__all__ = [
    "GRPOEntropyConfig",
    "GRPOEntropyTrainer",
    "EntropyScheduleCallback",
    "make_schedule",
    "PassAtKCallback",
    "EntropyPerformanceFitCallback",
    "EntropyPlotCallback",
    "AnnealingCurriculumCallback",
    "__version__",
]
