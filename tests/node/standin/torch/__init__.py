"""kvpilot's test stand-in for torch: NOT torch.

The stand-in SGLang server (sglang/launch_server.py here) has no torch, but kvpilot's connector
imports it and reads the host pool's buffer as a tensor. This module gives it only that: a
`Tensor` naming host memory by address, element count and element size (`data_ptr`, `numel`,
`element_size`), which is all the connector calls on the stand-in's host pool.
"""

STAND_IN = "kvpilot test stand-in (not torch)"

uint8 = "uint8"


class Tensor:
    def __init__(self, address: int, numel: int, element_size: int = 1, dtype: str = uint8):
        self._address = address
        self._numel = numel
        self._element_size = element_size
        self.dtype = dtype

    def data_ptr(self) -> int:
        return self._address

    def numel(self) -> int:
        return self._numel

    def element_size(self) -> int:
        return self._element_size

    def __len__(self) -> int:
        return self._numel
