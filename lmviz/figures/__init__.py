"""Figures and chips: data in, Plotly figure or HTML out, in the palettes that keep colour from carrying
meaning alone. Never a model."""
