// The Shakespeare chapter's play panel: the book's character-level GPT, run in the reader's
// browser by ONNX Runtime Web (WebAssembly, served from this site: _static/vendor/).
//
// Nothing heavy loads with the page: the runtime (ort.wasm.min.js and its .mjs/.wasm) and the
// model (play/shakespeare_gpt.onnx, exported by scripts/export_shakespeare_onnx.py) are fetched
// when the reader first presses Run. Then, as GPT.generate does: each step reads the last
// `context_length` (64) characters, takes the next character's logits, and picks the arg-max
// (temperature 0) or samples from softmax(logits / temperature).
//
// Hooks for tests and outside tools: [data-play] (the panel; data-play-state is idle, loading,
// running, done or error), [data-play-prompt], [data-play-temperature], [data-play-length],
// [data-play-run], [data-play-output] (the continuation only, without the prompt).
(() => {
  "use strict";
  const script = document.currentScript;
  const STATIC = new URL("../", script ? script.src : location.href); // .../_static/
  const RUNTIME = new URL("vendor/onnxruntime-web/", STATIC);
  const META = new URL("play/shakespeare_gpt.json", STATIC);
  const PAINT_MS = 40; // hand the page back to the browser this often while generating
  const MAX_LENGTH = 2000;

  const MB = (bytes) => `${(bytes / 1e6).toFixed(1)} MB`;
  const shown = (c) => (c === "\n" ? "\u21b5" : c === " " ? "\u2423" : c);
  const yieldToPage = () => new Promise((resolve) => setTimeout(resolve, 0));

  let loading = null; // one load for every panel of the page

  function loadScript(url) {
    return new Promise((resolve, reject) => {
      const tag = document.createElement("script");
      tag.src = url;
      tag.onload = resolve;
      tag.onerror = () => reject(new Error(`could not load ${url}`));
      document.head.appendChild(tag);
    });
  }

  async function fetchOk(url, kind) {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`could not load ${url} (HTTP ${response.status})`);
    return kind === "json" ? response.json() : response.arrayBuffer();
  }

  // The bytes this panel has fetched: the runtime's files and the model's (resource timing).
  function downloaded() {
    return performance
      .getEntriesByType("resource")
      .filter((e) => e.name.startsWith(RUNTIME.href) || e.name.startsWith(new URL("play/", STATIC).href))
      .filter((e) => !/\/play\/play\.(js|css)$/.test(new URL(e.name).pathname))
      .reduce((sum, e) => sum + (e.encodedBodySize || e.transferSize || 0), 0);
  }

  function load() {
    loading ||= (async () => {
      const start = performance.now();
      const meta = await fetchOk(META, "json");
      const model = fetchOk(new URL(meta.model, META), "bytes");
      if (!window.ort) await loadScript(new URL("ort.wasm.min.js", RUNTIME).href);
      const ort = window.ort;
      ort.env.wasm.wasmPaths = RUNTIME.href;
      ort.env.wasm.numThreads = 1; // no cross-origin isolation on a static site: one thread
      ort.env.wasm.proxy = false;
      ort.env.logLevel = "error";
      const session = await ort.InferenceSession.create(await model, {
        executionProviders: ["wasm"],
        graphOptimizationLevel: "all",
        logSeverityLevel: 3,
      });
      return { ort, session, meta, seconds: (performance.now() - start) / 1000 };
    })();
    loading.catch(() => (loading = null)); // a failed load may be retried
    return loading;
  }

  function argmax(values) {
    let best = 0;
    for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
    return best; // the first of equal maxima, as torch.argmax
  }

  function softmax(logits, temperature) {
    let top = -Infinity;
    for (const x of logits) top = Math.max(top, x / temperature);
    const p = Float64Array.from(logits, (x) => Math.exp(x / temperature - top));
    const total = p.reduce((a, b) => a + b, 0);
    return p.map((x) => x / total);
  }

  function sample(probabilities) {
    let u = Math.random();
    for (let i = 0; i < probabilities.length; i++) {
      u -= probabilities[i];
      if (u < 0) return i;
    }
    return probabilities.length - 1;
  }

  function setup(panel) {
    const $ = (name) => panel.querySelector(`[data-play-${name}]`);
    const prompt = $("prompt"), temperature = $("temperature"), length = $("length");
    const button = $("run"), output = $("output"), echo = $("echo"), status = $("status");
    const bars = $("bar-list");
    const bytes = Number(panel.dataset.playBytes || 0);
    let running = false, stop = false, reported = false;

    const say = (text) => (status.textContent = text);
    panel.dataset.playState = "idle";
    if (!(typeof WebAssembly === "object" && typeof WebAssembly.instantiate === "function")) {
      panel.dataset.playState = "unavailable";
      button.disabled = true;
      say(
        "This browser runs no WebAssembly (it lacks it, or it is turned off), and the model " +
          "needs it to run here. The chapter's notebook runs the same model: open it on Colab " +
          "or Binder with the launch button at the top of the page."
      );
      return;
    }
    say(
      `Runs the chapter's model in your browser. The first run downloads ${bytes ? MB(bytes) : "the model and its runtime"}` +
        " (the model and ONNX Runtime Web); nothing is sent anywhere."
    );

    function drawBars(probabilities, chars, picked) {
      const order = Array.from(probabilities.keys())
        .sort((a, b) => probabilities[b] - probabilities[a])
        .slice(0, 10);
      bars.replaceChildren(
        ...order.map((i) => {
          const row = document.createElement("li");
          row.className = i === picked ? "play-bar play-picked" : "play-bar";
          const label = document.createElement("span");
          label.className = "play-char";
          label.textContent = shown(chars[i]);
          label.title = JSON.stringify(chars[i]);
          const track = document.createElement("span");
          track.className = "play-track";
          const fill = document.createElement("span");
          fill.className = "play-fill";
          fill.style.width = `${(100 * probabilities[i]).toFixed(1)}%`;
          track.appendChild(fill);
          const value = document.createElement("span");
          value.className = "play-value";
          value.textContent = `${(100 * probabilities[i]).toFixed(1)}%`;
          row.append(label, track, value);
          return row;
        })
      );
    }

    async function generate() {
      const t = Number(temperature.value), n = Math.round(Number(length.value));
      const text = prompt.value;
      if (!text) return say("Write a prompt first: the model continues it.");
      if (temperature.value.trim() === "") return say("Give a temperature: 0 always takes the likeliest character.");
      if (!(t >= 0 && t <= 5)) return say("The temperature goes from 0 (always the likeliest character) to 5.");
      if (!(n >= 1 && n <= MAX_LENGTH)) return say(`The length goes from 1 to ${MAX_LENGTH} characters.`);
      running = true;
      stop = false;
      button.textContent = "Stop";
      panel.dataset.playState = "loading";
      const started = performance.now();
      let model;
      try {
        if (!loading) say(`Loading the model and the runtime (${bytes ? MB(bytes) : "a few MB"})\u2026`);
        model = await load();
      } catch (error) {
        panel.dataset.playState = "error";
        say(`The model could not be loaded: ${error.message || error}. Reload the page to try again.`);
        running = false;
        button.textContent = "Run";
        return;
      }
      const { ort, session, meta } = model;
      const index = new Map(meta.vocabulary.map((c, i) => [c, i]));
      const unknown = [...new Set([...text].filter((c) => !index.has(c)))];
      if (unknown.length) {
        panel.dataset.playState = "idle";
        say(`Not in the model's ${meta.vocabulary.length} characters: ${unknown.map((c) => JSON.stringify(c)).join(" ")}. Write the prompt with characters of the plays.`);
        running = false;
        button.textContent = "Run";
        return;
      }
      const ids = [...text].map((c) => index.get(c));
      echo.textContent = text;
      output.textContent = "";
      const written = document.createTextNode("");
      output.appendChild(written);
      panel.dataset.playState = "running";
      const loaded = performance.now();
      let painted = loaded, probabilities = null, picked = 0, made = 0;
      say("Writing\u2026");
      try {
        for (; made < n && !stop; made++) {
          const context = ids.slice(-meta.context_length); // the crop of GPT.generate
          const tokens = new ort.Tensor("int64", BigInt64Array.from(context, (i) => BigInt(i)), [1, context.length]);
          const logits = (await session.run({ [meta.input]: tokens }))[meta.output].data;
          probabilities = softmax(logits, t > 0 ? t : 1);
          picked = t > 0 ? sample(probabilities) : argmax(logits);
          ids.push(picked);
          written.appendData(meta.vocabulary[picked]);
          if (performance.now() - painted > PAINT_MS) {
            drawBars(probabilities, meta.vocabulary, picked);
            await yieldToPage(); // let the text appear as it is written
            painted = performance.now();
          }
        }
      } catch (error) {
        panel.dataset.playState = "error";
        say(`The model stopped with an error: ${error.message || error}`);
        running = false;
        button.textContent = "Run";
        return;
      }
      const end = performance.now();
      if (probabilities) drawBars(probabilities, meta.vocabulary, picked);
      const writing = (end - loaded) / 1000, total = (end - started) / 1000;
      const perSecond = made / writing;
      Object.assign(panel.dataset, {
        playState: "done",
        playChars: String(made),
        playSeconds: total.toFixed(3), // pressing Run to the last character, loading included
        playWritingSeconds: writing.toFixed(3),
        playDownloaded: String(downloaded()),
      });
      const fetched = Number(panel.dataset.playDownloaded);
      say(
        `${made} characters in ${writing.toFixed(1)} s (${Math.round(perSecond)} per second` +
          `${t > 0 ? `, temperature ${t}` : ", always the likeliest"}).` +
          (fetched && !reported ? ` Downloaded ${MB(fetched)}, loaded in ${model.seconds.toFixed(1)} s.` : "")
      );
      reported = true;
      running = false;
      button.textContent = "Run";
    }

    button.addEventListener("click", () => {
      if (running) stop = true;
      else generate();
    });
  }

  const start = () => document.querySelectorAll("[data-play]").forEach(setup);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
