// The OpenAI Node SDK's Responses streaming, against the server at argv[2] (its /v1/infer), on
// model argv[3]. First `responses.create({stream: true})`, a text answer, its events as sent.
// Then the `responses.stream` helper on a function call the model must make (one call per
// answer, so 64 tokens hold it): it rebuilds the response from the events, and throws on a
// first event other than response.created, on an event type it does not know, and on an event
// naming an item or part not added before; its finalResponse() is the response of the last
// lifecycle event, response.completed or response.incomplete alike. Prints one JSON line: each
// run's event types, sequence numbers and output indexes, its final response, and the request
// bodies the SDK sent.
import OpenAI from 'openai';

const [baseURL, model] = process.argv.slice(2);
const requests = [];
const fetchLogged = (url, init) => {
  requests.push({ url: String(url), body: JSON.parse(init.body) });
  return fetch(url, init);
};
const client = new OpenAI({ baseURL, apiKey: 'x', maxRetries: 0, fetch: fetchLogged });
const summary = (events) => ({
  types: events.map((e) => e.type),
  sequence_numbers: events.map((e) => e.sequence_number),
  output_indexes: events.map((e) => e.output_index ?? null),
});

const events = [];
const params = { model, input: 'Count from 1 to 5.', max_output_tokens: 16 };
for await (const event of await client.responses.create({ ...params, stream: true })) {
  events.push(event);
}
const last = events.at(-1);
const done = ['response.completed', 'response.incomplete'].includes(last?.type);
const raw = { ...summary(events), response: done ? last.response : null };

const helperEvents = [];
const stream = client.responses.stream({
  model,
  input: 'What is the weather in Oslo?',
  max_output_tokens: 64,
  temperature: 0,
  tools: [
    {
      type: 'function',
      name: 'get_weather',
      description: 'Current weather for a city.',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string' } },
        required: ['city'],
        additionalProperties: false,
      },
      strict: true,
    },
  ],
  tool_choice: 'required',
  parallel_tool_calls: false,
});
stream.on('event', (event) => helperEvents.push(event));
const response = await stream.finalResponse();
const helper = { ...summary(helperEvents), response };

console.log(JSON.stringify({ raw, helper, requests }));
