// node prefill.mjs MODEL.gguf 1000,2000,... -> one JSON line: llama.cpp's cold prefill time for
// each number of tokens, and its decode rate for one stream (greedy), on every core, CPU only.
import os from "node:os";
import { getLlama } from "node-llama-cpp";

const [modelPath, lengthsArg] = process.argv.slice(2);
const lengths = lengthsArg.split(",").map(Number);
// The longest prompt and room for the answer (the GGUF says 8,192 trained positions; llama.cpp
// goes past them unscaled: the same work per token as the node's YaRN positions).
const contextSize = Math.max(...lengths) + 256;
const decodeTokens = 64;

const llama = await getLlama({ gpu: false, build: "never" }); // its prebuilt binary, no build
const model = await llama.loadModel({ modelPath });
const threads = os.availableParallelism();

const topics = ["a lighthouse keeper", "bread", "a chess club", "the moon landing", "bees in winter"];
const notes = Array.from({ length: 3300 }, (_, i) => `${topics[i % topics.length]} number ${i} is noted;`);
const allTokens = model.tokenize(`Read these notes, then answer in one word. ${notes.join(" ")}`);

const prefill = [];
for (const length of lengths) {
  if (length > allTokens.length) throw new Error(`only ${allTokens.length} tokens of text`);
  const context = await model.createContext({ contextSize, threads });
  const sequence = context.getSequence();
  const started = performance.now();
  await sequence.evaluateWithoutGeneratingNewTokens(allTokens.slice(0, length));
  prefill.push({ tokens: length, seconds: (performance.now() - started) / 1000 });
  await context.dispose();
}

const context = await model.createContext({ contextSize: 1024, threads });
const sequence = context.getSequence();
let generated = 0;
let first = 0;
for await (const token of sequence.evaluate(model.tokenize("Count from one to one hundred:"))) {
  void token;
  generated += 1;
  if (generated === 1) first = performance.now();
  if (generated === decodeTokens) break;
}
const decode_tok_s = (generated - 1) / ((performance.now() - first) / 1000);
await context.dispose();
console.log(JSON.stringify({ threads, prefill, decode_tok_s }));
