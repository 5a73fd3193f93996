// Uploads audio to `tokenscope serve`'s /v1/audio/transcriptions with the
// official OpenAI client (its own multipart encoding, a client no one here
// wrote) and prints one JSON line with what it saw. Usage:
//   node openai_transcription.mjs BASE_URL MODEL
import OpenAI, { toFile } from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 30000 });

// A 16 kHz mono 16-bit WAV of `ms` milliseconds (a quiet ramp).
function wav(ms) {
  const samples = (ms * 16000) / 1000;
  const b = Buffer.alloc(44 + 2 * samples);
  b.write("RIFF", 0);
  b.writeUInt32LE(36 + 2 * samples, 4);
  b.write("WAVEfmt ", 8);
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(1, 22);
  b.writeUInt32LE(16000, 24);
  b.writeUInt32LE(32000, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write("data", 36);
  b.writeUInt32LE(2 * samples, 40);
  for (let i = 0; i < samples; ++i) b.writeInt16LE((i % 200) - 100, 44 + 2 * i);
  return b;
}

const out = {};
const json = await client.audio.transcriptions.create({
  file: await toFile(wav(2000), "speech.wav", { type: "audio/wav" }), model, language: "en", temperature: 0,
});
out.json = json;
const verbose = await client.audio.transcriptions.create({
  file: await toFile(wav(3000), "speech.wav"), model, response_format: "verbose_json",
});
out.verbose = { duration: verbose.duration, segments: verbose.segments.length, text: verbose.text };
const stream = await client.audio.transcriptions.create({
  file: await toFile(wav(2000), "speech.wav"), model, stream: true,
});
const deltas = [];
for await (const event of stream) for (const c of event.choices ?? []) if (c.delta?.content) deltas.push(c.delta.content);
out.stream = deltas;
try {
  await client.audio.transcriptions.create({ file: await toFile(Buffer.from("not audio"), "x.mp3"), model });
  out.error = null;
} catch (e) {
  out.error = { status: e.status, param: e.param ?? e.error?.param, message: e.message };
}
console.log(JSON.stringify(out));
