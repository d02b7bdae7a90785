// Hand-written sample texts for the tokenizer conformance corpus (written for this project).
// Random and long inputs are generated in make_corpus.mjs from these and from seeded generators.

export const MULTILINGUAL = [
  'The quick tokenizer ran through every sentence twice before lunch.',
  "It's a test: don't panic, we'll see what they've done and I'm sure you'd agree.",
  'Numbers like 3.14159, 2,718 and 1e-9 appear in 42% of the lines (roughly).',
  '我们今天在实验室里测试新的分词器，结果非常好。',
  '东京和北京之间的距离大约是两千一百公里。',
  'きょうは いい てんき ですね。カタカナ も まぜて テスト します。',
  '日本語の文章には漢字とひらがなとカタカナが混ざっています。',
  '한국어 문장도 포함합니다. 토크나이저가 잘 동작하나요?',
  'Привет, мир! Это проверка токенизатора на русском языке.',
  'Γειά σου κόσμε· αυτή είναι μια δοκιμή.',
  'مرحبا بالعالم، هذا اختبار للمقسم.',
  'שלום עולם, זו בדיקה של המפרק.',
  'नमस्ते दुनिया, यह टोकनाइज़र की जाँच है।',
  'สวัสดีชาวโลก นี่คือการทดสอบ',
  'Xin chào thế giới, đây là bài kiểm tra bộ tách từ.',
  'Größere Übungen für Äpfel, Öl und Straße — naïve café façade.',
  'Ça va? Où est l’hôtel « Le Cœur »? Très bien!',
  '¿Dónde está la biblioteca? ¡Aquí mismo, señor!',
  'Zażółć gęślą jaźń — polski test.',
  'Ελληνικά, Русский, 中文, 日本語, 한국어 in one line.',
  'ቀላል የአማርኛ ሙከራ።',
  'Mixed: abc中文def日本ghi한국jkl',
  'A combining accent: e\u0301, a\u0308, n\u0303 and stacked x\u0301\u0302\u0303\u0304.',
  'Fullwidth ＡＢＣ１２３！？ and halfwidth ｶﾀｶﾅ.',
  'Math: ∑ᵢ xᵢ² ≤ ∞, ∀x∈ℝ, √2 ≈ 1.414, ∂f/∂x.',
  'Currency: $100, €20.50, £7, ¥1000, ₹500, ₿0.01.',
];

export const CODE = [
  'def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n',
  'for (int i = 0; i < n; ++i) {\n\tsum += values[i] * weights[i];\n}\n',
  'const result = items.filter((x) => x.score >= 0.5).map(({ id }) => id);',
  '{"name": "fathom", "version": "0.1.0", "tags": ["llm", "inference"], "ok": true}',
  '<div class="row"><span id=\'a1\'>Hello &amp; welcome</span></div>',
  'SELECT id, name FROM users WHERE created_at > \'2024-01-01\' ORDER BY id DESC;',
  '#include <vector>\n#include <string>\n\nint main() { std::vector<std::string> v{"a", "b"}; }\n',
  'fn main() {\r\n    let x: Vec<u32> = (0..10).collect();\r\n    println!("{:?}", x);\r\n}\r\n',
  '    if x == 0:\n        pass\n    elif x < 0:\n\t\traise ValueError("negative")\n',
  '$ ls -la /tmp && echo "done" | grep -E \'^d\' > out.txt 2>&1',
  'a=1;b=2;c=a+b;d=c**2//3%4;e=[i for i in range(10) if i%2==0]',
  'x <<= 2; y >>= 3; z ||= w && !v; q ??= r?.s?.[0];',
  '// TODO(fathom): handle the empty case\n/* block\n   comment */\n',
  'https://example.com/path/to/page?query=1&lang=en#section-2',
  'user.name+tag@example.org, 192.168.0.1:8080, 2001:db8::1',
];

export const EMOJI = [
  'Thumbs 👍 and 👍🏽 and 👍🏿!',
  'Family 👨‍👩‍👧‍👦 and couple 👩‍❤️‍👨 and astronaut 🧑🏿‍🚀.',
  'Flags 🇯🇵🇺🇸🇩🇪 and rainbow 🏳️‍🌈 and pirate 🏴‍☠️.',
  'Keycaps 1️⃣ 2️⃣ #️⃣ and hearts ❤️ ❤ 💙.',
  '😀😃😄😁😆😅🤣😂🙂🙃',
  'Text with emoji at the end 🎉',
  '🎉 at the start',
  'Tag sequence 🏴󠁧󠁢󠁳󠁣󠁴󠁿 (Scotland).',
  'Zero width: a\u200bb, joiner a\u200db, non-joiner a\u200cb, BOM \ufeffx.',
];

export const NUMBERS = [
  '1', '12', '123', '1234', '12345', '123456', '1234567890',
  '3.14159', '1,000,000', '-42', '+7', '0.000001', '1e10', '0xFF', '0b1010',
  '٠١٢٣٤٥٦٧٨٩', '۱۲۳۴', '०१२३४५', '０１２３４５６', '①②③', 'Ⅻ and ⅷ', 'x² + y³ = z¹⁰',
  '2024-05-17T12:34:56Z', 'v1.2.3-rc.4', 'tel: +1 (555) 012-3456',
  'abc123def4567ghi89',
];

export const WHITESPACE = [
  ' ', '  ', '   ', '    ', '\t', '\t\t', '\n', '\n\n', '\n\n\n', '\r\n', '\r\n\r\n', '\r', ' \n', '\n ',
  ' \n ', 'a  b', 'a   b', 'a \n b', 'a\n\nb', 'a\r\nb', 'a\t\tb', 'a \t b', 'trailing   ', '   leading',
  'a\u00a0b', 'a\u00a0\u00a0b', 'a\u3000b', 'a\u2028b', 'a\u2029b', 'a\u2003\u2003b', 'a\u0085b',
  'a\u000bb\u000cc', ' \t\r\n\u000b\u000c', 'x \ny', 'x  \n  y', 'x\n \ny', 'end\n', '\n\nstart',
  'line1\nline2\n\n\nline3   \n', '    indented\n        more\n', '. . .', ' ,', ' ?!', '!\n\n',
];

// DeepSeek added tokens inline, plus near-misses that must not match.
export const SPECIAL = [
  '<｜begin▁of▁sentence｜>Hello',
  '<｜begin▁of▁sentence｜><｜User｜>Hi there<｜Assistant｜>Hello!<｜end▁of▁sentence｜>',
  '<think>\nLet me think about it.\n</think>\n\nThe answer is 4.',
  '<think></think>',
  'a<think>b</think>c',
  ' <think> spaced </think> ',
  '<|EOT|>', 'x<|EOT|>y', '<｜▁pad▁｜><｜▁pad▁｜>',
  '<｜place▁holder▁no▁0｜><｜place▁holder▁no▁797｜><｜place▁holder▁no▁798｜><｜place▁holder▁no▁799｜>',
  '<｜fim▁begin｜>def f():<｜fim▁hole｜>\n<｜fim▁end｜>',
  '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
  '<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{"temp": 21}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>',
  '<｜User', '<｜User｜', 'User｜>', '<think', '<think >', '< think>', '</think', '<|EOT|', '<｜end▁of▁sentence',
  '<<think>>', '<｜User｜><｜User｜>', '<｜end▁of▁sentence｜><｜end▁of▁sentence｜>',
  '<｜begin▁of▁sentence｜', '<｜｜>', '<｜place▁holder▁no▁8000｜>',
];
