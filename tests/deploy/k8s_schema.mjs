// Validates Kubernetes objects against the API's OpenAPI schemas, as
// compiled into the npm package kubernetes-models (tests/npm).
//
// usage: node k8s_schema.mjs NPM_MODULES < OBJECTS.json
// OBJECTS.json is {"WHERE": [object, ...], ...}: the objects of each
// rendering, WHERE naming it in the messages. Prints one line per problem
// (an object of a kind the package has no schema for is one) and exits 1
// if there was any; 2 for a bad invocation or an unreadable package.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const npm = process.argv[2];
if (!npm) {
  console.error("usage: node k8s_schema.mjs NPM_MODULES < OBJECTS.json");
  process.exit(2);
}
const models = path.join(npm, "kubernetes-models");
if (!fs.existsSync(path.join(models, "package.json"))) {
  console.error(`${models} is missing: run scripts/install-deps --tests ` +
    "(npm ci in tests/npm)");
  process.exit(2);
}
const version = JSON.parse(
  fs.readFileSync(path.join(models, "package.json"), "utf8")).version;

// One module per API group and version: "v1" (the core group) is
// kubernetes-models/v1, "apps/v1" kubernetes-models/apps/v1.
const groups = new Map();
async function model(apiVersion, kind) {
  if (typeof apiVersion !== "string" || !/^[a-z0-9.]+(\/[a-z0-9]+)?$/.test(
    apiVersion)) {
    return undefined;
  }
  if (!groups.has(apiVersion)) {
    const index = path.join(models, ...apiVersion.split("/"), "index.mjs");
    groups.set(apiVersion, fs.existsSync(index) ?
      await import(pathToFileURL(index).href) : {});
  }
  const m = groups.get(apiVersion)[kind];
  return typeof m === "function" && typeof m.prototype?.validate ===
    "function" ? m : undefined;
}

const renderings = JSON.parse(fs.readFileSync(0, "utf8"));
let problems = 0, objects = 0;
for (const [where, objs] of Object.entries(renderings)) {
  for (const obj of objs) {
    objects++;
    const name = `${obj.kind}/${obj.metadata?.name}`;
    const Model = await model(obj.apiVersion, obj.kind);
    if (!Model) {
      console.log(`${where}: ${name}: no schema for apiVersion ` +
        `${obj.apiVersion} kind ${obj.kind} in kubernetes-models ${version}`);
      problems++;
      continue;
    }
    try {
      new Model(obj).validate();
    } catch (e) {
      // Ajv's messages name the path as data/spec/...: one line per error.
      for (const line of String(e.message).split(/, (?=data[/ ])/)) {
        console.log(`${where}: ${name}: ${line.replace(/^data\/?/, ".")}`);
        problems++;
      }
    }
  }
}
if (!problems) {
  console.log(`${objects} objects valid against the Kubernetes schemas of ` +
    `kubernetes-models ${version}`);
}
process.exit(problems ? 1 : 0);
