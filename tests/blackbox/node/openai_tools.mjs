// Drives `tokenscope serve` through the official OpenAI client's tool and
// structured-output helpers (code no one here wrote): a tool loop with
// runTools (non-streamed and streamed: the client assembles the streamed
// tool-call deltas itself), and parse() with a json_schema response format.
// Prints one JSON line with what it saw. Usage:
//   node openai_tools.mjs BASE_URL MODEL
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 30000 });
const out = {};

const parameters = {
  type: "object",
  properties: { city: { type: "string" }, unit: { enum: ["c", "f"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};

async function loop(stream) {
  const seen = [];
  const body = {
    model,
    messages: [{ role: "user", content: "What is the weather in Oslo and in Rome?" }],
    tools: [{
      type: "function",
      function: {
        name: "get_weather",
        description: "The weather in a city",
        parameters,
        parse: JSON.parse,
        function: (args) => {
          seen.push(args);
          return { city: args.city, temperature_c: 4 };
        },
      },
    }],
    max_tokens: 200,
  };
  if (stream) body.stream = true;
  const runner = client.chat.completions.runTools(body);
  const content = await runner.finalContent();
  const messages = runner.messages;
  return {
    content,
    calls: seen,
    requests: (await runner.allChatCompletions()).length,
    tool_messages: messages.filter((m) => m.role === "tool").length,
    finishes: (await runner.allChatCompletions()).map((c) => c.choices[0].finish_reason),
  };
}
out.loop = await loop(false);
out.stream_loop = await loop(true);

const parsed = await client.chat.completions.parse({
  model,
  messages: [{ role: "user", content: "A person, please." }],
  response_format: {
    type: "json_schema",
    json_schema: {
      name: "person",
      strict: true,
      schema: {
        type: "object",
        properties: { name: { type: "string" }, age: { type: "integer", minimum: 0, maximum: 120 } },
        required: ["name", "age"],
        additionalProperties: false,
      },
    },
  },
  max_tokens: 100,
});
out.parsed = parsed.choices[0].message.parsed;
console.log(JSON.stringify(out));
