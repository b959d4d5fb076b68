/** The service's error answers mapped to the error tree, and the client's own errors (no server). */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { errorFromResponse } from "../src/errors.js";
import {
  ActionDenied,
  AgentExists,
  AlreadyTerminated,
  APIError,
  ApprovalTimeout,
  BadRequest,
  Conflict,
  Forbidden,
  GuardError,
  GuardSetupError,
  IdempotencyConflict,
  InternalError,
  InvalidState,
  MethodNotAllowed,
  NotFound,
  Quarantined,
  ReadOnly,
  ServiceUnavailable,
  TooLarge,
  TransportError,
  Unauthorized,
  UnknownAction,
} from "../src/index.js";

const body = (code: string, message = "something went wrong") => JSON.stringify({ error: message, code });

describe("errors", () => {
  const documented: [number, string, typeof APIError][] = [
    [400, "bad_request", BadRequest],
    [401, "unauthorized", Unauthorized],
    [403, "forbidden", Forbidden],
    [404, "not_found", NotFound],
    [404, "unknown_action", UnknownAction],
    [405, "method_not_allowed", MethodNotAllowed],
    [409, "agent_exists", AgentExists],
    [409, "invalid_state", InvalidState],
    [409, "already_terminated", AlreadyTerminated],
    [409, "idempotency_conflict", IdempotencyConflict],
    [413, "too_large", TooLarge],
    [500, "internal", InternalError],
    [503, "quarantined", Quarantined],
    [503, "read_only", ReadOnly],
  ];
  for (const [status, code, cls] of documented) {
    test(`${status} ${code} is ${cls.name}`, () => {
      const error = errorFromResponse(status, body(code));
      assert.equal(error.constructor, cls);
      assert.ok(error instanceof APIError && error instanceof GuardError && error instanceof Error);
      assert.deepEqual([error.status, error.code, error.message, error.name], [status, code, "something went wrong", cls.name]);
    });
  }

  test("conflicts share a class, and unknown_action is a not_found", () => {
    assert.ok(errorFromResponse(409, body("idempotency_conflict")) instanceof Conflict);
    assert.ok(errorFromResponse(404, body("unknown_action")) instanceof NotFound);
    assert.ok(errorFromResponse(503, body("read_only")) instanceof ServiceUnavailable);
  });

  test("an unknown code is the class of its status and keeps the code", () => {
    const error = errorFromResponse(409, body("new_conflict", "a new kind"));
    assert.deepEqual([error.constructor, error.code, error.message], [Conflict, "new_conflict", "a new kind"]);
    const plain = errorFromResponse(418, body("teapot"));
    assert.deepEqual([plain.constructor, plain.status, plain.code], [APIError, 418, "teapot"]);
  });

  test("an answer without an error body is mapped by its status", () => {
    const error = errorFromResponse(503, "<html>busy</html>");
    assert.deepEqual([error.constructor, error.code, error.message], [ServiceUnavailable, "unavailable", "HTTP 503 without an error body: <html>busy</html>"]);
    const other = errorFromResponse(502, "");
    assert.deepEqual([other.constructor, other.status, other.code, other.message], [APIError, 502, "http_502", "HTTP 502 without an error body"]);
  });

  test("resent is carried", () => {
    assert.equal(errorFromResponse(409, body("invalid_state"), true).resent, true);
    assert.equal(errorFromResponse(409, body("invalid_state")).resent, false);
  });

  test("ActionDenied keeps its code, reason and action ID, and says the code once", () => {
    const reason = { code: "insufficient_budget", cost: 5, remaining: 1 };
    const error = new ActionDenied("act-7", reason);
    assert.deepEqual([error.code, error.reason, error.actionId, error.status], ["insufficient_budget", reason, "act-7", null]);
    assert.equal(error.message, "action act-7 denied: insufficient_budget (cost=5, remaining=1)");
    assert.equal(
      new ActionDenied("act-3", { code: "rejected", by: "alice", reason: "no" }).message,
      'action act-3 denied: rejected (by="alice", reason="no")',
    );
    assert.equal(new ActionDenied("act-3", { code: "terminated" }).message, "action act-3 denied: terminated");
  });

  test("every error of the client is a GuardError with status, code and message", () => {
    const errors: GuardError[] = [
      new GuardSetupError("no admin token found"),
      new TransportError("connection refused", "http://127.0.0.1:1"),
      new ApprovalTimeout("act-1", 2.5),
      new ActionDenied("act-1", { code: "terminated", reason: "scar_limit" }),
    ];
    for (const error of errors) {
      assert.ok(error instanceof GuardError);
      assert.equal(error.status, null);
      assert.ok(error.code);
      assert.equal(error.name, error.constructor.name);
    }
    assert.equal(new ApprovalTimeout("act-1", 2.5).code, "approval_timeout");
    assert.equal(
      new ApprovalTimeout("act-1", 2.5).message,
      "action act-1 is still pending approval after 2.5s; it stays pending on the service",
    );
  });
});
