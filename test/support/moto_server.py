"""moto's server, with each request served whole before the next (SQS's aside).

AWS applies each call atomically: two callers never see one half-done. moto's threaded server
serves requests on concurrent threads over shared, unlocked state, and two kinds of races
reached the tests:
- DynamoDB: update_item reads the item, evaluates the condition and changes the item without a
  lock, so two concurrent conditional updates could both pass (the per-job record's tests race
  conditional writes and need DynamoDB's guarantee);
- EC2: describe_instances with a tag filter iterates an instance's tags while a concurrent
  CreateTags changes them, and the request fails with moto's HTML 500 page
  ("RuntimeError: dictionary changed size during iteration"), which no real EC2 returns.
So one lock is held for each request. SQS's requests are left out: ReceiveMessage long-polls
inside its request (it sleeps until a message or WaitTimeSeconds), and holding the lock there
would stall every other call. Everything else is moto as `python3 -m moto.server` runs it.
"""
import functools
import re
import sys
import threading

import moto.server
from moto.server import main

_LOCK = threading.RLock()
# The service a SigV4 request is signed for: Credential=AKID/DATE/REGION/SERVICE/aws4_request.
_SERVICE = re.compile(r"Credential=[^/,]+/[^/,]+/[^/,]+/([^/,]+)/aws4_request")
_UNLOCKED = {"sqs"}


def _service(environ):
    match = _SERVICE.search(environ.get("HTTP_AUTHORIZATION", ""))
    return match.group(1) if match else None


class _OneRequestAtATime(moto.server.DomainDispatcherApplication):
    def __call__(self, environ, start_response):
        if _service(environ) in _UNLOCKED:
            return super().__call__(environ, start_response)
        with _LOCK:
            # The whole body is made inside the lock: a lazily rendered one would read the
            # state after another request changed it.
            return list(super().__call__(environ, start_response))


moto.server.DomainDispatcherApplication = _OneRequestAtATime

if __name__ == "__main__":
    main(sys.argv[1:])
