"""The cheapest sound check of a line that a signed checkpoint vouches for
and a state snapshot has folded: read from the line's bytes, never parsed.

A start must check the hash chain of such a line, not its signature (the
checkpoint vouches for it) and not its record (the snapshot holds the fold
up to it). The reference (``ChainVerifier.feed_strict``) and the fast path of
``_fast_verify`` both parse the line and write it again to prove it
canonical; here the line's hash input is cut out of its bytes and hashed,
and nothing else is done that the chain does not need. Why that is enough,
and when it is: docs/log-format.md ("What a start checks of a vouched
record") gives the argument; in short:

- The checkpoint's signature (checked by the caller under the audit key, for
  this agent) pins the hash of record N. A line whose hash input hashes to
  the hash the next line names as its ``prev`` is, SHA-256 being collision
  resistant, the hash input the key's holder chained: going down from N,
  every hash input up to N is the one that was written, byte for byte.
- The line's bytes outside its hash input are its top-level ``hash`` and
  ``sig`` members. ``hash`` must be the digest just computed. ``sig`` must be
  128 lowercase hex, as the reference requires, and is otherwise not read
  (the checkpoint vouches for the record: the reference does not check it
  either). Where the two members stand is pinned by the checks below: each
  sits at the top level of the object, between a key that sorts before it
  and one that sorts after it; in a canonical hash input (the written one)
  that place is unique, so the line is the written line, but for the hex of
  its ``sig``.

So a line taken here would have passed the reference, PROVIDED the log goes
on to reach the checkpoint's hash (which pins it) and the checkpoint was
made over a log the reference accepts (guardd writes checkpoints only at
heads it wrote or verified). Until the checkpoint is reached a line taken
here is taken provisionally: when anything later fails, the caller verifies
the whole log again by the reference, which names the first fault. A line
of any other shape (a backslash anywhere, an object before ``hash``, a
nested value next to ``sig``, a second ``"prev":"``, ...) is not taken: the
caller feeds it to the reference path, which has the last word on it.

``tests/agents_runtime/log/test_vouched.py`` compares the verdicts with the
reference's on generated logs and on every kind of tampering.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

_HASH = b'"hash":"'  # the member's key and the value's opening quote
_SIG = b',"sig":"'
_PREV = b'"prev":"'
_HEX = b"0123456789abcdef"
# The bytes of a number or a literal (true, false, null) in canonical JSON.
_SCALAR = b"0123456789.+-aeflnrstu"
_QUOTE = 0x22
_COLON = 0x3A
_COMMA = 0x2C
_BRACE = 0x7D


def vouched_lines(lines: Sequence[bytes], start: int, stop: int, prev: bytes) -> tuple[int, bytes]:
    """Check ``lines[start:stop]`` of a log whose line before ``start`` has
    the hash ``prev`` (64 hex, as bytes), while they have the shape checked
    here: the index of the first line not taken (``stop`` when all were) and
    the hash of the last line taken (``prev`` when none was). A line is
    taken when its hash input hashes to its ``hash``, its ``prev`` is the
    hash of the line before, and ``hash`` and ``sig`` stand where the
    canonical form puts them; taken lines are sound only once the log
    reaches a signed checkpoint after them (see the module's docstring).

    The checks rest on one fact of a line without backslashes: every quote
    opens or closes a string, so an even count of quotes before a place puts
    it outside any string. In the comments, L is the line and I its hash
    input (L without the two members), which the checkpoint pins to the
    written, canonical one. (``x.find(b) >= 0``, not ``b in x``: bytes'
    ``in`` tries the operand as an integer first, and costs three times as
    much.)"""
    sha256 = hashlib.sha256
    index = start
    try:
        for line in lines[start:stop]:
            if line.find(b"\\") >= 0:
                break
            # "hash": before it one brace (the object's own: so no object
            # is open but that one, and an array cannot be, since a key
            # follows) and an even count of quotes (not in a string).
            at = line.find(_HASH)
            pre = line[:at]
            if at < 1 or pre.count(b"{") != 1 or pre.count(b'"') & 1:
                break
            if at > 1:  # the member before it: its key sorts before "hash"
                if pre[-2] == _QUOTE:  # "key":"value",
                    closing = pre.rfind(b'"', 0, -2) - 2
                    if pre[closing + 1] != _COLON or pre[closing] != _QUOTE:
                        break
                else:  # "key":1.5, (an array holds no quote: the same)
                    closing = pre.rfind(b'"')
                    if pre[closing + 1] != _COLON:
                        break
                if pre[-1] != _COMMA or pre[pre.rfind(b'"', 0, closing) + 1 : closing] >= b"hash":
                    break
            end = at + 74  # '"hash":"' 64 hex '",'
            comma = line.rfind(_SIG)
            sig_end = comma + 138  # ',"sig":"' 128 hex '",'
            middle = line[end : comma + 1]  # I from "hash" to "sig", with its comma
            tail = line[sig_end:]  # I after "sig"
            key_end = middle.find(b'"', 1)
            if (
                line[end - 2 : end] != b'",'
                # the member after "hash": a key that sorts after it
                or middle[0] != _QUOTE
                or middle[key_end + 1] != _COLON
                or middle[1:key_end] <= b"hash"
                # "sig": 128 lowercase hex, as the reference requires
                or line[sig_end - 2 : sig_end] != b'",'
                or line[comma + 8 : sig_end - 2].translate(None, _HEX)
            ):
                break
            # After "sig": members up to the object's closing brace, the last
            # byte, and no other brace (so no object is closed before: it is
            # at the top level; nor an array, since a key follows), not in a
            # string; the first key sorts after "sig". Most often that is
            # '"ts":"<no quote>"}' alone: four quotes, read at once.
            if tail.count(b'"') != 4 or not tail.startswith(b'"ts":"') or tail[-2:] != b'"}':
                key_end = tail.find(b'"', 1)
                if (
                    tail[-1] != _BRACE
                    or tail.count(b"}") != 1
                    or tail.count(b'"') & 1
                    or tail[0] != _QUOTE
                    or tail[key_end + 1] != _COLON
                    or tail[1:key_end] <= b"sig"
                ):
                    break
            # The member before "sig": a string, number or literal (whose
            # key is then at the top level too) with a key that sorts before.
            # Most often '"seq":<digits>,': then its last quote is the last
            # one, closing the key "seq".
            seq_at = middle.rfind(b'"seq":')
            if not middle[seq_at + 6 : -1].isdigit():
                if middle[-2] == _QUOTE:
                    closing = middle.rfind(b'"', 0, -2) - 2
                    if middle[closing + 1] != _COLON or middle[closing] != _QUOTE:
                        break
                else:
                    closing = middle.rfind(b'"')
                    if middle[closing + 1] != _COLON or middle[closing + 2 : -1].translate(
                        None, _SCALAR
                    ):
                        break
                if middle[middle.rfind(b'"', 0, closing) + 1 : closing] >= b"sig":
                    break
            # "prev": the top-level one is between "hash" and "sig"; the only
            # '"prev":"' there, so it is that one.
            link = middle.find(_PREV)
            if middle[link + 8 : link + 72] != prev or middle.find(_PREV, link + 1) >= 0:
                break
            digest = line[at + 8 : at + 72]
            if sha256(pre + middle + tail).hexdigest().encode() != digest:
                break
            prev = digest
            index += 1
    except IndexError:  # a line too short for the shape
        pass
    return index, prev
