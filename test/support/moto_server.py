"""moto's server, with DynamoDB's item operations made atomic.

DynamoDB evaluates a conditional write's condition and applies the write as one atomic step:
two writers racing for an item cannot both succeed. moto's threaded server does not: its
update_item reads the item, evaluates the condition and changes the item without a lock, so
two concurrent conditional updates can both pass. The tests that race conditional writes
(tests of the per-job record) need DynamoDB's guarantee, so each item operation holds one
lock here. Everything else is moto as `python3 -m moto.server` runs it.
"""
import functools
import sys
import threading

from moto.dynamodb.models import DynamoDBBackend
from moto.server import main

_LOCK = threading.RLock()


def _atomic(method):
    @functools.wraps(method)
    def locked(*args, **kwargs):
        with _LOCK:
            return method(*args, **kwargs)

    return locked


for _name in ("put_item", "update_item", "delete_item", "get_item", "transact_write_items"):
    setattr(DynamoDBBackend, _name, _atomic(getattr(DynamoDBBackend, _name)))

if __name__ == "__main__":
    main(sys.argv[1:])
