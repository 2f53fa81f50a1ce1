"""The room's answers as the projector shows them (lmviz.figures.votes): a bar per answer and vote, each count
written on its bar, the right answer named on the axis and each vote by its pattern and the legend, so that
neither is told by colour alone."""

from lmviz.figures.votes import PARTLY_RIGHT_MARK, RIGHT_MARK, VOTE_STYLES, Bar, answer_label, vote_bars


def test_a_choice_question_has_a_bar_per_choice_in_order_with_the_answer_named():
    fig = vote_bars([("First vote", [Bar("cat", 3, 3), Bar("the", 1, 0)])], ["the", "cat", "sat"], {"cat"},
                    "How the room answered")
    (bars,) = fig.data
    assert list(bars.x) == ["the", f"cat<br><b>{RIGHT_MARK}</b>", "sat"]  # a choice nobody picked counts 0
    assert list(bars.y) == [1, 3, 0] and list(bars.text) == ["1", "3", "0"]
    assert fig.layout.title.text == "How the room answered" and not fig.layout.showlegend
    assert fig.layout.yaxis.dtick == 1  # a tick at every whole count, none between


def test_two_votes_stand_side_by_side_told_apart_by_pattern_and_legend():
    votes = [("First vote", [Bar("0.69", 2, 2), Bar("1.5", 3, 0)]),
             ("Second vote", [Bar("0.69", 4, 4), Bar("0.7", 1, 1)])]
    fig = vote_bars(votes, ["0.69", "0.7", "1.5"], set(), "Votes")
    first, second = fig.data
    assert fig.layout.barmode == "group" and fig.layout.showlegend
    assert (first.name, second.name) == ("First vote", "Second vote")
    assert list(first.y) == [2, 0, 3] and list(second.y) == [4, 1, 0]
    assert first.marker.pattern.shape != second.marker.pattern.shape  # not by colour alone
    assert [style["pattern"]["shape"] for style in VOTE_STYLES] == ["", "/"]
    assert list(first.x) == [f"0.69<br><b>{RIGHT_MARK}</b>", f"0.7<br><b>{RIGHT_MARK}</b>", "1.5"]


def test_a_bin_of_typed_numbers_across_the_tolerances_edge_is_partly_right_and_markup_is_shown_as_typed():
    assert answer_label("0.70", 1, 3, False) == f"0.70<br><b>{PARTLY_RIGHT_MARK}</b>"
    assert answer_label("<b>x</b>", 0, 2, False) == "&lt;b&gt;x&lt;/b&gt;"
