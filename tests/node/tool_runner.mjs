// The Anthropic Node SDK's tool runner with its defaults (a server-held thread first), against
// the server at argv[2] (its /v1/infer), on model argv[3]. One tool the model must call; prints
// one JSON line: the tool's calls and the messages the runner got back.
import Anthropic from '@anthropic-ai/sdk';
import { betaTool } from '@anthropic-ai/sdk/helpers/beta/json-schema';

const [baseURL, model] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey: 'x', maxRetries: 0 });
const calls = [];
const weather = betaTool({
  name: 'get_weather',
  description: 'Current weather for a city.',
  inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  run: (input) => {
    calls.push(input);
    return 'Sunny, 21 C';
  },
});
const runner = client.beta.messages.toolRunner({
  model,
  max_tokens: 200,
  temperature: 0,
  messages: [{ role: 'user', content: 'What is the weather in Oslo?' }],
  tools: [weather],
  // one call: the runner runs tools only on stop_reason tool_use, and the 135M model may repeat a
  // parallel call to max_tokens
  tool_choice: { type: 'any', disable_parallel_tool_use: true },
  max_iterations: 2,
});
const replies = [];
for await (const message of runner) {
  replies.push({ stop_reason: message.stop_reason, content: message.content.map((b) => b.type) });
}
console.log(JSON.stringify({ calls, replies }));
