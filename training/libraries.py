"""Process-wide settings of the libraries training runs on: every random number generator seeded, and
the logging and progress bars of setfit and the Hugging Face libraries silenced (training reports itself).
"""

from __future__ import annotations

import random
import warnings

import numpy as np


def set_seed(seed: int) -> None:
    import torch
    from transformers import set_seed as hf_set_seed

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    hf_set_seed(seed)


def quiet_libraries() -> None:
    """setfit sets its loggers to INFO on import and the HF libraries draw tqdm bars; we report ourselves."""
    import datasets
    from setfit import logging as setfit_logging
    from transformers.utils import logging as hf_logging

    setfit_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
