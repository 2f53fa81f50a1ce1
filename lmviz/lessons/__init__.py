"""One computation per lesson: text and model in, records out (every number the lesson's page shows).
Lessons use core and models, never serving or the app: the same function runs in a test, the CLI and a page."""
