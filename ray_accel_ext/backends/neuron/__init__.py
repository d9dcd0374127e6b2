"""AWS Neuron backend: Inferentia and Trainium (entry point ``ray_accel_ext.backends.neuron:NeuronBackend``)."""

from .backend import NeuronBackend

__all__ = ["NeuronBackend"]
