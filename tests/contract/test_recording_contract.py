"""The surface contract, run against the in-memory RecordingSurface."""

from __future__ import annotations

import pytest

from signoff.testing import RecordingHarness, SurfaceContract


class TestRecordingContract(SurfaceContract):
    """RecordingSurface behaves like every other surface."""

    @pytest.fixture
    async def harness(self) -> RecordingHarness:
        """A fresh recording surface."""
        return RecordingHarness()
