// The Vercel AI SDK's OpenAI provider, against the server at argv[2] (its /v1/infer), on model
// argv[3]. `createOpenAI(...)(model)` is its Responses model: it posts to `${baseURL}/responses`.
// generateText with one tool the model must call in step 1 (toolChoice required, one call per
// answer) and none in step 2, so the tool's result goes back and is answered; then
// generateObject with a small schema (text.format json_schema). Prints one JSON line: the
// tool's calls, each step's finish reason and tool calls, the object, and the request bodies.
import { createOpenAI } from '@ai-sdk/openai';
import { generateObject, generateText, stepCountIs, tool } from 'ai';
import { z } from 'zod';

const [baseURL, modelId] = process.argv.slice(2);
const requests = [];
const fetchLogged = (url, init) => {
  requests.push({ url: String(url), body: JSON.parse(init.body) });
  return fetch(url, init);
};
const model = createOpenAI({ baseURL, apiKey: 'x', fetch: fetchLogged })(modelId);
const openai = { parallelToolCalls: false }; // one call, so 64 tokens hold it

const calls = [];
const text = await generateText({
  model,
  prompt: 'What is the weather in Oslo?',
  maxOutputTokens: 64,
  temperature: 0,
  maxRetries: 0,
  tools: {
    get_weather: tool({
      description: 'Current weather for a city.',
      inputSchema: z.object({ city: z.string() }),
      execute: async (input) => {
        calls.push(input);
        return 'Sunny, 21 C';
      },
    }),
  },
  toolChoice: 'required',
  prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: 'none' } : {}),
  stopWhen: stepCountIs(2),
  providerOptions: { openai },
});
const steps = text.steps.map((step) => ({
  finishReason: step.finishReason,
  toolCalls: step.toolCalls.map((call) => ({ toolName: call.toolName, input: call.input })),
  text: step.text,
}));

const { object, finishReason } = await generateObject({
  model,
  prompt: 'Name a city in France.',
  schema: z.object({ name: z.string().max(20), country: z.string().max(20) }),
  maxOutputTokens: 64,
  temperature: 0,
  maxRetries: 0,
});

console.log(JSON.stringify({ calls, steps, object: { object, finishReason }, requests }));
