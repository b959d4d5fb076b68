/** `npm pack` makes a tarball that installs into another project, imports, and type-checks. */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { DATA, SDK_DIR } from "./support/guardd.js";

// The public key of docs/receipts.md's worked example (tests/data/receipt-example.jsonl).
const WORKED_EXAMPLE_KEY = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8";

let dir: string;
let tarball: string;
let files: string[];

function npm(args: string[], cwd: string): string {
  // --prefer-offline: canonicalize comes from the cache `npm ci` filled.
  return execFileSync("npm", [...args, "--prefer-offline", "--no-audit", "--no-fund"], { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

before(() => {
  dir = mkdtempSync(join(tmpdir(), "guard-pack-"));
  const [packed] = JSON.parse(npm(["pack", "--json", "--pack-destination", dir], SDK_DIR)) as {
    filename: string;
    files: { path: string }[];
  }[];
  assert.ok(packed);
  tarball = join(dir, packed.filename);
  files = packed.files.map((file) => file.path).sort();
  const project = join(dir, "project");
  mkdirSync(project);
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  npm(["install", tarball], project);
});
after(() => rmSync(dir, { recursive: true, force: true }));

describe("npm pack", () => {
  test("packs the compiled modules and their declarations, and no sources or tests", () => {
    for (const file of ["package.json", "dist/index.js", "dist/index.d.ts", "dist/ai.js", "dist/ai.d.ts", "dist/receipt.js"]) {
      assert.ok(files.includes(file), `${file} is not in the tarball`);
    }
    assert.deepEqual(
      files.filter((file) => !file.startsWith("dist/") && file !== "package.json"),
      [],
    );
  });

  test("the installed package imports and checks the worked example's receipt", () => {
    const project = join(dir, "project");
    const script = `
      import { GuardClient, verifyReceipt, ActionDenied } from "guardd-client";
      import { guardTools } from "guardd-client/ai";
      const [requested, allowed] = process.argv[1].split("\\n");
      const id = verifyReceipt([requested, allowed], "${WORKED_EXAMPLE_KEY}", {
        agentId: "billing-bot", tool: "send_invoice", input: { to: "ops@example.com", amount: 12.5 },
        maxAgeSecs: 60, now: new Date(1740830430000),
      });
      console.log(id, typeof GuardClient, typeof guardTools, new ActionDenied("act-1", { code: "x" }).name);
    `;
    const lines = readFileSync(join(DATA, "receipt-example.jsonl"), "utf8").split("\n").slice(2, 4).join("\n");
    const out = execFileSync(process.execPath, ["--input-type=module", "-e", script, lines], { cwd: project, encoding: "utf8" });
    assert.equal(out.trim(), "act-1 function function ActionDenied");
  });

  test("the installed package's declarations type-check a consumer", () => {
    const project = join(dir, "project");
    writeFileSync(
      join(project, "use.ts"),
      `import { GuardClient, type Decision } from "guardd-client";
       import { guardTools } from "guardd-client/ai";
       const client = new GuardClient({ token: "agt_bot.mac" });
       const search = client.guarded(async (q: { query: string }) => q.query.length, { tool: "search" });
       const n: Promise<number> = search({ query: "x" });
       const decision: Promise<Decision> = client.requestAction("search", { q: 1 }, { cost: "0.5" });
       const tools = guardTools(client, { search: { execute: async (input: { q: string }) => input.q } });
       export { n, decision, tools };
      `,
    );
    writeFileSync(
      join(project, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          noEmit: true,
          module: "NodeNext",
          moduleResolution: "NodeNext",
          target: "ES2022",
          lib: ["ES2024"],
          types: ["node"],
          typeRoots: [join(SDK_DIR, "node_modules", "@types")],
        },
        files: ["use.ts"],
      }),
    );
    execFileSync(process.execPath, [join(SDK_DIR, "node_modules", "typescript", "bin", "tsc"), "-p", project], { encoding: "utf8" });
  });
});
