// An independent check of the JSON Schemas (schema/*.schema.json) with ajv in strict mode.
//
//   node bindings/ts/dist/src/schema_check.js SCHEMA_DIR [CASES.jsonl]
//
// Compiles every schema with `strict: true` (exit 1 naming the schema when one does not compile).
// With CASES.jsonl (one {"schema": FILE_NAME, "instance": ANY} per line), prints one JSON line per
// case: {"valid": true|false, "errors": [ajv's messages]}.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import Ajv2020Module from "ajv/dist/2020.js";
import type { ValidateFunction } from "ajv";

const Ajv2020 = Ajv2020Module.default ?? Ajv2020Module;
const [dir, cases] = process.argv.slice(2);
if (!dir) {
  process.stderr.write("usage: schema_check SCHEMA_DIR [CASES.jsonl]\n");
  process.exit(2);
}
const validators = new Map<string, ValidateFunction>();
for (const name of readdirSync(dir).filter((f) => f.endsWith(".schema.json")).sort()) {
  const ajv = new Ajv2020({ strict: true, allErrors: true });
  try {
    validators.set(name, ajv.compile(JSON.parse(readFileSync(join(dir, name), "utf8"))));
  } catch (e) {
    process.stderr.write(`schema_check: ${name} does not compile under ajv strict mode: ${(e as Error).message}\n`);
    process.exit(1);
  }
}
if (!cases) {
  process.stdout.write(`schema_check: ${validators.size} schemas compile under ajv strict mode\n`);
  process.exit(0);
}
for (const line of readFileSync(cases, "utf8").split("\n")) {
  if (!line) continue;
  const { schema, instance } = JSON.parse(line) as { schema: string; instance: unknown };
  const v = validators.get(schema);
  if (!v) throw new Error(`no schema ${schema}`);
  const valid = v(instance) as boolean;
  const errors = (v.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message ?? ""}`);
  process.stdout.write(JSON.stringify({ valid, errors: valid ? [] : errors }) + "\n");
}
