"""The collector pause shared by the controller thread and the snapshot writer."""

from __future__ import annotations

import gc
import threading

from kraft_engine.server.collector import collector_paused


def test_overlapping_pauses_on_two_threads_keep_the_collector_off_until_the_last_one_ends() -> None:
    # The controller thread pauses for each event while the snapshot writer holds a pause for a
    # whole snapshot: the first block to end must not let the collector run under the other.
    assert gc.isenabled()
    other_paused = threading.Event()
    other_may_end = threading.Event()

    def other() -> None:
        with collector_paused():
            other_paused.set()
            other_may_end.wait(30)

    thread = threading.Thread(target=other, name="other-pause")
    try:
        with collector_paused():
            assert not gc.isenabled()
            thread.start()
            assert other_paused.wait(30)
        assert not gc.isenabled()  # the other thread's pause still holds
        other_may_end.set()
        thread.join(30)
        assert gc.isenabled()
        with collector_paused():  # and the next pause starts from that again
            assert not gc.isenabled()
        assert gc.isenabled()
    finally:
        other_may_end.set()
        thread.join(30)
        gc.enable()
