// node decode.mjs MODEL.gguf 0,1000,... TOKENS -> one JSON line: llama.cpp's decode rate for one
// stream (greedy, every core, CPU only) after a context of each length, the context evaluated
// first and not timed: tokens after the first over the time after the first.
import os from "node:os";
import { getLlama } from "node-llama-cpp";

const [modelPath, contextsArg, tokensArg] = process.argv.slice(2);
const contexts = contextsArg.split(",").map(Number);
const tokens = Number(tokensArg);

const llama = await getLlama({ gpu: false, build: "never" }); // its prebuilt binary, no build
const model = await llama.loadModel({ modelPath });
const threads = os.availableParallelism();

const topics = ["a lighthouse keeper", "bread", "a chess club", "the moon landing", "bees in winter"];
const notes = Array.from({ length: 3300 }, (_, i) => `${topics[i % topics.length]} number ${i} is noted;`);
const allTokens = model.tokenize(`Read these notes. ${notes.join(" ")}`);
const ask = model.tokenize(" Write the word dog two hundred times. dog dog dog dog dog dog");

const decode = [];
for (const context of contexts) {
  if (context > allTokens.length) throw new Error(`only ${allTokens.length} tokens of text`);
  const ctx = await model.createContext({ contextSize: context + ask.length + tokens + 64, threads });
  const sequence = ctx.getSequence();
  await sequence.evaluateWithoutGeneratingNewTokens(allTokens.slice(0, context));
  let generated = 0;
  let first = 0;
  for await (const token of sequence.evaluate(ask)) {
    void token;
    generated += 1;
    if (generated === 1) first = performance.now();
    if (generated === tokens) break;
  }
  decode.push({ context, tok_s: (generated - 1) / ((performance.now() - first) / 1000) });
  await ctx.dispose();
}
console.log(JSON.stringify({ threads, decode }));
