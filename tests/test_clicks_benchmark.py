"""benchmarks/clicks.py has a main action for every lesson of the path (CI's --quick run then clicks each)."""

from benchmarks.clicks import ACTIONS
from lmviz.course.registry import PATH


def test_every_lesson_of_the_path_has_a_main_action():
    assert set(ACTIONS) == {lesson.url_path for lesson in PATH}
