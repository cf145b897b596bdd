"""The bench's two commands, `bench` and `eval_extraction`: Django management commands that
`python -m bench` runs, and that `manage.py` reaches through the thin commands of the same
names in memories/management/commands/."""
