// The top bar's navigation. At desktop width every link is in the bar; at
// phone width (see .nav-toggle in styles.css) the links fold behind a menu
// button, leaving only the Inbox (and its count) in the bar. The open menu
// closes on Escape (focus back on the button), on choosing a link and on a
// click outside it.
import { useEffect, useRef, useState, type MouseEvent } from "react";
import { Link } from "@tanstack/react-router";
import { InboxNavLink } from "@/features/inbox/components/InboxNavLink";

export function MainNav() {
  const [open, setOpen] = useState(false);
  const toggleRef = useRef<HTMLButtonElement>(null);
  const navRef = useRef<HTMLElement>(null);

  useEffect(() => {
    if (!open) return;
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== "Escape") return;
      setOpen(false);
      toggleRef.current?.focus();
    };
    const onPointer = (e: PointerEvent) => {
      const target = e.target as Node;
      if (!navRef.current?.contains(target) && !toggleRef.current?.contains(target)) setOpen(false);
    };
    document.addEventListener("keydown", onKey);
    document.addEventListener("pointerdown", onPointer);
    return () => {
      document.removeEventListener("keydown", onKey);
      document.removeEventListener("pointerdown", onPointer);
    };
  }, [open]);

  // A chosen link closes the menu.
  const onNavClick = (e: MouseEvent) => {
    if ((e.target as HTMLElement).closest("a")) setOpen(false);
  };

  return (
    <>
      <button
        ref={toggleRef}
        type="button"
        className="btn btn-ghost nav-toggle"
        aria-expanded={open}
        aria-controls="main-nav"
        onClick={() => setOpen((o) => !o)}
        data-testid="nav-toggle"
      >
        <span className="nav-toggle-icon" aria-hidden="true" />
        <span className="sr-only">Menu</span>
      </button>
      <Link to="/" className="brand">
        Shepherd
      </Link>
      <nav id="main-nav" ref={navRef} className="nav" aria-label="Main" data-open={open} onClick={onNavClick}>
        <Link to="/" activeOptions={{ exact: true }} activeProps={{ className: "nav-active" }}>
          Agents
        </Link>
        <InboxNavLink />
        <Link to="/tasks" activeProps={{ className: "nav-active" }}>
          Tasks
        </Link>
        <Link to="/fleet" activeProps={{ className: "nav-active" }}>
          Fleet
        </Link>
        <Link to="/conversations" activeProps={{ className: "nav-active" }}>
          Conversations
        </Link>
        <Link to="/sessions" activeProps={{ className: "nav-active" }}>
          Sessions
        </Link>
      </nav>
    </>
  );
}
