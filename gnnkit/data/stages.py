"""Which of a dataset's OGB splits each Lightning stage reads."""

#: Lightning stage (``train``, ``val``, ``test``) -> OGB split name (``train``, ``valid``, ``test``).
SPLIT_OF_STAGE = {"train": "train", "val": "valid", "test": "test"}
