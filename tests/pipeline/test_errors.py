"""A failed write names the folder it wrote to; other errors pass as they are."""

import errno

import pytest

from pipeline.errors import writing_under


def test_writing_under_names_the_folder_of_a_failed_write_only():
    with pytest.raises(OSError) as full:
        with writing_under("/cache/x"):
            raise OSError(errno.ENOSPC, "No space left on device")
    assert (full.value.filename, full.value.errno) == ("/cache/x", errno.ENOSPC)
    with pytest.raises(OSError) as read:  # a read's error is not the folder's
        with writing_under("/cache/x"):
            raise OSError(errno.EIO, "Input/output error")
    assert read.value.filename is None
