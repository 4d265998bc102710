"""The session as an event-sourced state machine: commands in, events out, state by folding."""
