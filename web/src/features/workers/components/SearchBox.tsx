// The Workers page's search field: it follows the URL and writes back to it
// once typing pauses.
import { useEffect, useState } from "react";

export function SearchBox({ value, onChange }: { value: string; onChange: (v: string) => void }) {
  const [text, setText] = useState(value);
  useEffect(() => setText(value), [value]);
  useEffect(() => {
    if (text === value) return;
    const t = setTimeout(() => onChange(text), 200);
    return () => clearTimeout(t);
  }, [text, value, onChange]);
  return (
    <input
      type="search"
      className="search"
      placeholder="Search..."
      aria-label="Search tasks"
      value={text}
      onChange={(e) => setText(e.target.value)}
      data-testid="worker-search"
    />
  );
}
