// Reference token ids for tokenscope's real-tokenizer tests
// (src/tokenizers/reference_test.cpp), computed by
// @lenml/tokenizers (a port of transformers.js) on the tokenizer.json and
// tokenizer_config.json shipped in @lenml/tokenizer-NAME.
//
//   node tokenizer_reference.mjs NAME CORPUS.json OUT.json
//
// CORPUS.json is a JSON array of strings; OUT.json receives one
// {"plain": [...], "special": [...]} per string: the ids without and with
// add_special_tokens.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { TokenizerLoader } from "@lenml/tokenizers";

const [name, corpusPath, outPath] = process.argv.slice(2);
if (!name || !corpusPath || !outPath) {
  console.error("usage: node tokenizer_reference.mjs NAME CORPUS.json OUT.json");
  process.exit(2);
}
const here = path.dirname(fileURLToPath(import.meta.url));
const models = path.join(here, "node_modules", "@lenml", `tokenizer-${name}`, "models");
const readJson = (file) => JSON.parse(fs.readFileSync(file, "utf8"));
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: readJson(path.join(models, "tokenizer.json")),
  tokenizerConfig: readJson(path.join(models, "tokenizer_config.json")),
});
const corpus = readJson(corpusPath);
const out = corpus.map((text) => ({
  plain: tokenizer.encode(text, { add_special_tokens: false }),
  special: tokenizer.encode(text, { add_special_tokens: true }),
}));
fs.writeFileSync(outPath, JSON.stringify(out));
