"""The zombie-worker demo and the instrumented targets it shares with the tests."""
