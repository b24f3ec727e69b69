from .grpo_entropy_config import GRPOEntropyConfig
from .grpo_entropy_trainer import GRPOEntropyTrainer

__all__ = ["GRPOEntropyConfig", "GRPOEntropyTrainer"]
