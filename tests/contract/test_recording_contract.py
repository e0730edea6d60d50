"""The surface contract, run against the in-memory RecordingPlatform."""

from __future__ import annotations

import pytest

from signoff.testing import PlatformContract, RecordingHarness


class TestRecordingContract(PlatformContract):
    """RecordingPlatform behaves like every other surface."""

    @pytest.fixture
    async def harness(self) -> RecordingHarness:
        """A fresh recording surface."""
        return RecordingHarness()
