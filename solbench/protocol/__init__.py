"""What crosses the process boundary between the orchestrator and its workers.

`framing` puts one message on the channel (a JSON frame plus each tensor's raw bytes, never pickle),
`messages` defines every message (one typed, versioned request and reply per op, decoded strictly), and
`descriptors` the CUDA IPC records that stand for large GPU outputs between the two workers of a device.
Both sides import this package; nothing here imports the orchestrator or the worker.
"""
