"""Live class: the teacher opens a room, the class joins on their phones, and the check-yourself questions asked
from the lessons are answered there and counted here (lmviz.app.live; the store is lmviz.live.store)."""

import streamlit as st

from lmviz.app import live

st.title("Live class")
live.teacher_page()
