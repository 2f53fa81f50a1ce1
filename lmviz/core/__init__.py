"""The pure pieces every lesson is built from: losses, masking, text and tokens, numbers, the toy example,
the story corpus and the comparison of two texts. Nothing here loads a model, serves one or draws a page."""
