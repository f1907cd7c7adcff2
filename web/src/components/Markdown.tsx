// Markdown for agent and user text. react-markdown builds React elements and,
// without rehype-raw, shows raw HTML as escaped text, so agent output can
// never inject markup; links are limited to http(s), mailto and same-site.
import ReactMarkdown from "react-markdown";

const SAFE = /^(https?:|mailto:|#|\/)/i;

export function Markdown({ text }: { text: string }) {
  return (
    <div className="markdown">
      <ReactMarkdown
        urlTransform={(url) => (SAFE.test(url) ? url : "")}
        components={{ a: ({ node: _n, ...props }) => <a {...props} target="_blank" rel="noreferrer noopener" /> }}
      >
        {text}
      </ReactMarkdown>
    </div>
  );
}
