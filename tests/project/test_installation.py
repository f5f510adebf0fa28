"""apic.installation owns the patches: a capture asks it (through apic.patches) to finish installing, and
refuses while apic is uninstalled, on the CPU and for an apic=True CUDA capture alike."""

from __future__ import annotations

import pytest
import warp as wp

import apic
from apic import capture, installation, patches
from apic.errors import CaptureError

pytestmark = [pytest.mark.warp_version, pytest.mark.interpreter, pytest.mark.install]


def test_a_capture_refuses_while_apic_is_uninstalled_and_works_again_after_install():
    apic.uninstall()
    try:
        assert not apic.is_installed()
        with pytest.raises(CaptureError, match="apic is uninstalled"):
            patches.before_capture(cuda=False)
        with pytest.raises(CaptureError, match="apic is uninstalled"):
            patches.before_capture(cuda=True)
        with pytest.raises(CaptureError, match="apic is uninstalled"):
            capture.capture_begin(device="cpu")  # apic's own function, called directly
        with pytest.raises(CaptureError, match="apic is uninstalled"):
            installation.ensure_native_sinks()
    finally:
        apic.install()
    assert apic.is_installed()
    a = wp.zeros(4, dtype=wp.float32, device="cpu")
    with wp.ScopedCapture(device="cpu") as cap:
        a.fill_(2.0)
    assert not a.numpy().any()  # recorded, not run
    wp.capture_launch(cap.graph)
    assert (a.numpy() == 2.0).all()


def test_install_and_uninstall_are_idempotent():
    apic.install()  # already installed: nothing more is patched
    launch = wp.launch
    apic.install()
    assert wp.launch is launch
    apic.uninstall()
    try:
        original = wp.launch
        apic.uninstall()
        assert wp.launch is original and not apic.is_installed()
    finally:
        apic.install()
