"""A module written by hand as HLO text, with every node's place known, for the tests of tests/hlo."""

from __future__ import annotations

import pytest

HAND_HLO = """\
HloModule hand, entry_computation_layout={(f32[2,3,8,8]{3,2,1,0})->f32[2,5]{1,0}}

%fused (p0: f32[2,3,8,8], p1: f32[4,3,3,3]) -> f32[2,4,6,6] {
  %p0 = f32[2,3,8,8]{3,2,1,0} parameter(0)
  %p1 = f32[4,3,3,3]{3,2,1,0} parameter(1)
  ROOT %conv = f32[2,4,6,6]{3,2,1,0} convolution(%p0, %p1), window={size=3x3 pad=0_0x1_-1 rhs_dilate=1x2}, dim_labels=bf01_oi01->bf01, feature_group_count=1, metadata={op_name="c" source_file="x.py"}
}

%add_cond (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %main (x: f32[2,3,8,8], k: f32[4,3,3,3], w: f32[144,5]) -> (f32[2,5], f32[2]) {
  %x = f32[2,3,8,8]{3,2,1,0} parameter(0)
  %k = f32[4,3,3,3]{3,2,1,0} parameter(1)
  %w = f32[144,5]{0,1} parameter(2)
  %f = f32[2,4,6,6]{3,2,1,0} fusion(%x, %k), kind=kOutput, calls=%fused
  %r = f32[2,144]{1,0} reshape(%f)
  %d = f32[2,5]{1,0} dot(%r, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %z = f32[] constant(0)
  %red = f32[2]{0} reduce(%d, %z), dimensions={1}, to_apply=%add_cond
  %sl = f32[2,2]{1,0} slice(%d), slice={[0:2], [1:5:2]}
  %pd = f32[4,6]{1,0} pad(%sl, %z), padding=1_1x2_2
  ROOT %t = (f32[2,5]{1,0}, /*index=1*/f32[2]{0}) tuple(%d, %red)
}
"""
"""Node ids: fused p0 0, p1 1, conv 2; add_cond a 3, b 4, s 5; main x 6, k 7, w 8, f 9, r 10, d 11, z 12, red 13,
sl 14, pd 15, t 16."""


@pytest.fixture
def hand_text() -> str:
    return HAND_HLO
