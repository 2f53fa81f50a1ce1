"""The live class: rooms a teacher opens, codes the room joins with, the questions asked and the answers given,
kept in a small store (SQLite on one machine, PostgreSQL across replicas).

It imports neither torch nor Streamlit, so that the join page a phone opens loads in a moment and any layer may
use it; the Streamlit views of it live in lmviz.app. The questions it asks are the course's own (lmviz.course.quiz),
frozen as data, and are checked with the quiz's own rule."""
