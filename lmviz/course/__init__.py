"""The course around the lessons: the lesson registry (the single list of lessons), the quiz, each
lesson's check-yourself questions and the glossary. Plain Python, no torch: Home draws from it at once."""
