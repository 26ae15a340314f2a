import struct
from typing import Tuple
from types import SimpleNamespace as NS

dsl_user_op = lambda f: f
cute = NS(jit=lambda f: f)
cutlass = NS(range_constexpr=range)


def _r(v):
    return struct.unpack("f", struct.pack("f", v))[0]


class Float32(float):  # kb stand-in: every product and sum rounded to FP32
    def __mul__(self, o): return Float32(_r(float(self) * float(o)))
    __rmul__ = __mul__
    def __add__(self, o): return Float32(_r(float(self) + float(o)))
    __radd__ = __add__


POLY3 = tuple(Float32(_r(c)) for c in (1.0, 0.695146143436431884765625,
                                        0.227564394474029541015625, 0.077119089663028717041015625))


def max_rel_err(n):
    worst = 0.0
    for i in range(n):
        f = Float32(_r(i / n))
        exact = 2.0 ** float(f)
        worst = max(worst, abs(float(evaluate_polynomial(f, POLY3)) - exact) / exact)
    return worst
