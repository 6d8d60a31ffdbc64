"""--labels.limit: the extra labels a series keeps when it may carry at most N labels, and a count of the rest."""

from __future__ import annotations

import threading
from typing import Dict, Optional, Tuple

from exporter.base.logs import LogOnce, log

Pairs = Tuple[Tuple[str, str], ...]

# The order in which Mapping.extra_labels lists a pod's extras (pod_uid, workload_kind, workload,
# cluster_queue, local_queue, label_…, annotation_…) is kept; what goes first is the opposite end:
# annotations, then pod labels (each in reverse sorted order, so the same keys survive on every
# node), then the queues (local_queue first), then the workload pair, then pod_uid. What identifies a pod stays longest; free text a user may add by the dozen goes first.
_WORKLOAD_PAIR = ("workload_kind", "workload")
_MAX_ANSWERS = 4096  # distinct cuts remembered; far above a node's holders times their label shapes
_UNSEEN = object()  # not remembered, told apart from a remembered None (not even the owner labels fit)


class LabelLimit:
    """Cuts the extras of one series to what fits under `limit` labels, counting what it leaves off.

    Shared by every rewrite of one process: `dropped` counts the labels left off once for each
    distinct cut (the same holder's extras beside as many other labels), not per scrape, though the
    allocation rows are rendered on every scrape; the first time anything is dropped it is logged
    once, with the names.
    """

    def __init__(self, limit: Optional[int]):
        self.limit = limit
        self.dropped = 0
        self._dropped_log = LogOnce()  # the first cut, with the names
        self._lock = threading.Lock()  # rewrites and the allocation rows may be built on several threads
        # (extras, others, owner_labels) → the answer: a cut is counted once, however often asked for.
        # Two generations: when the newer is full it becomes the older, and an answer asked for again
        # moves back to the newer. Holders that left are forgotten, and one still there is not
        # counted again (clearing everything at once recounted every current holder's cut).
        self._answers: Dict[Tuple[Pairs, int, int], Optional[Pairs]] = {}
        self._older: Dict[Tuple[Pairs, int, int], Optional[Pairs]] = {}

    def fit(self, extras: Pairs, others: int, owner_labels: int) -> Optional[Pairs]:
        """`extras` cut so that the series' `others` labels (upstream's, or ours like resource and
        UUID), its `owner_labels` and the extras kept stay within the limit. None when the owner
        labels do not fit either: the caller leaves them off too (the series is served unattributed
        rather than refused by a store that enforces the same limit). Labels that are not ours are
        never cut."""
        if self.limit is None:
            return extras
        key = (extras, others, owner_labels)
        answer = self._answers.get(key, _UNSEEN)  # the common case, lock-free: a remembered answer
        if answer is not _UNSEEN:
            return answer
        with self._lock:  # read both generations, cut and count as one step: a cut is counted once
            answer, names, used = self._remembered(key)
        if names:
            self._log_first(names, used)
        return answer

    def _remembered(self, key: Tuple[Pairs, int, int]):
        """The answer for `key`, cut and counted here if neither generation holds it; with the names
        it left off (empty when it counted nothing) and the labels there were before the extras."""
        answer = self._answers.get(key, self._older.get(key, _UNSEEN))
        names, used = [], 0
        if answer is _UNSEEN:
            answer, count, names, used = self._fit(*key)
            self.dropped += count
        if len(self._answers) >= _MAX_ANSWERS // 2:  # holders come and go: forget those long gone
            self._older, self._answers = self._answers, {}
        self._answers[key] = answer
        return answer, names, used

    def _fit(self, extras: Pairs, others: int, owner_labels: int):
        """The cut, how many labels it leaves off and their names, and the labels before the extras."""
        used = others + owner_labels
        room = self.limit - used
        if room >= len(extras):
            return extras, 0, [], used
        if room < 0:
            return None, len(extras) + owner_labels, ["(owner labels)"] + [name for name, _ in extras], used
        kept = extras[:room]
        if kept and kept[-1][0] == _WORKLOAD_PAIR[0]:
            kept = kept[:-1]  # workload_kind without its workload would say nothing
        return kept, len(extras) - len(kept), [name for name, _ in extras[len(kept):]], used

    def _log_first(self, names, used: int) -> None:
        if not self._dropped_log.first("dropped"):
            return
        shown = ",".join(names[:10]) + (",…" if len(names) > 10 else "")
        log("warn", f"--labels.limit {self.limit}: series would carry more labels than allowed; the extra labels "
            "are dropped (annotations first, then pod labels, queues, workload, pod_uid) and counted in "
            "pod_gpu_exporter_limited_labels_total; logged once", limit=self.limit, labels_before_extras=used,
            dropped=shown)
