"""Export: one ONNX graph from a trained model, the int8 recipes and their parity gates, half-precision
storage, and reading a body or a whole model back out of a graph."""
