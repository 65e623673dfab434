"""`torchweld agent`: a language model writes ModelNew, the judge grades it, the feedback goes back, repeat.

prompt.py    what we ask (the task, the problem, the output contract; optionally our own compiled ModelNew)
client.py    an OpenAI-compatible chat endpoint, with retries, backoff, timeouts and one-line errors
locate.py    a build error's line in load_inline's generated files -> the line of the candidate it came from
feedback.py  a judge result -> the next message, something the model can act on
judging.py   the judge as a pluggable callable, run in per-GPU slots; a crash or hang is a result, not a stop
trajectory.py  the JSON Lines record of every round, read back to resume
loop.py      rounds x samples x problems, concurrently; the best correct candidate per problem
summary.py   the rich table of verdicts and speedups
cli.py       the `torchweld agent` subcommand
"""
