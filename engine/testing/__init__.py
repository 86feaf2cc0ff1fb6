"""Models made for tests and the demo (tiny checkpoints, training them, a scripted tool-calling
model) and the step gate a test holds an engine with. The control plane may import this package."""
