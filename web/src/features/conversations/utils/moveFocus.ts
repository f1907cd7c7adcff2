// Keyboard movement through the conversation page's lists of links.
import type { KeyboardEvent } from "react";

/** Arrow keys, Home and End move the focus through a list of links. */
export function moveFocus(e: KeyboardEvent<HTMLUListElement>) {
  const keys = ["ArrowDown", "ArrowUp", "Home", "End"];
  if (!keys.includes(e.key)) return;
  const links = [...e.currentTarget.querySelectorAll<HTMLAnchorElement>("a")];
  const at = links.indexOf(document.activeElement as HTMLAnchorElement);
  const next =
    e.key === "Home" ? 0 : e.key === "End" ? links.length - 1 : e.key === "ArrowDown" ? Math.min(at + 1, links.length - 1) : Math.max(at - 1, 0);
  if (links[next]) {
    e.preventDefault();
    links[next].focus();
  }
}
