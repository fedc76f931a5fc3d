"""Distillation: a student body that reproduces a teacher's sentence embeddings, cut from the teacher's
own layers (shallow) or of another encoder (encoder), with the stored teacher's targets."""
