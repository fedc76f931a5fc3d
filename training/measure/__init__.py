"""Measuring any model, exported or a SetFit checkpoint: the eval and bench speed commands and the
backends that open a model for them."""
