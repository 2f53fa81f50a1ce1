"""Serving a model to a whole class: one padded forward pass for the texts that arrive together, long texts
read in pieces, out-of-memory told in a sentence, and each visitor's fair share. Never shown on a page."""
