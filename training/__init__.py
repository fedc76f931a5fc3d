"""Training side: corpus loading and checking, SetFit training, calibration and ONNX export.

Only ``training.corpus.labelled`` is importable without the ``train`` extra.
"""
