// Drives `tokenscope serve` with the official OpenAI client (a client no one
// here wrote) and prints one JSON line with what it saw. Usage:
//   node openai_client.mjs BASE_URL API_KEY
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: apiKey || "none", maxRetries: 0, timeout: 30000 });
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const completion = await client.completions.create({
  model: out.models[0], prompt: "Once upon a time", max_tokens: 7, ignore_eos: true,
});
out.completion = { text: completion.choices[0].text, finish: completion.choices[0].finish_reason,
                   usage: completion.usage };

const chat = await client.chat.completions.create({
  model: out.models[0], messages: [{ role: "user", content: "Say something." }], max_tokens: 5, ignore_eos: true,
});
out.chat = { content: chat.choices[0].message.content, role: chat.choices[0].message.role,
             finish: chat.choices[0].finish_reason, usage: chat.usage };

const stream = await client.chat.completions.create({
  model: out.models[0], messages: [{ role: "user", content: "Stream please." }], max_tokens: 6, ignore_eos: true,
  stream: true, stream_options: { include_usage: true },
});
const deltas = [];
let roleSeen = null, finish = null, usage = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    if (c.delta.role) roleSeen = c.delta.role;
    if (c.delta.content) deltas.push(c.delta.content);
    if (c.finish_reason) finish = c.finish_reason;
  }
}
out.stream = { deltas, role: roleSeen, finish, usage };

const textStream = await client.completions.create({
  model: out.models[0], prompt: "Count", max_tokens: 4, ignore_eos: true, stream: true,
});
const texts = [];
for await (const chunk of textStream) for (const c of chunk.choices) if (c.text) texts.push(c.text);
out.text_stream = texts;

try {
  await client.completions.create({ model: "no-such-model", prompt: "x" });
  out.error = null;
} catch (e) {
  out.error = { status: e.status, message: e.message, type: e.type ?? e.error?.type, param: e.param ?? e.error?.param };
}
try {
  await client.chat.completions.create({ model: out.models[0], messages: [{ role: "user", content: "x" }], n: 3 });
  out.n_error = null;
} catch (e) {
  out.n_error = { status: e.status, param: e.param ?? e.error?.param };
}
console.log(JSON.stringify(out));
