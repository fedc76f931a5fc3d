"""Fitting a model: SetFit's contrastive phase and heads (IntentModel), temperature calibration, the
in-scope distance, the compound head and the turn reader, and the train and build commands."""
