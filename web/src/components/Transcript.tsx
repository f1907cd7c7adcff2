// A run's transcript as one linear sequence of steps (see Step.tsx).
// Virtualised: thousands of steps render only what is on screen. With
// `follow`, each new step is scrolled into view; scrolling up (away from the
// newest step) calls `onScrollAway`, which turns following off.
import { useEffect, useRef } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import type { TranscriptStep } from "@/api/types";
import { Step } from "@/components/Step";

/** How near the end (px) still counts as at the newest step. */
const AT_END = 32;

export function Transcript({
  steps,
  follow = false,
  onScrollAway,
}: {
  steps: TranscriptStep[];
  follow?: boolean;
  onScrollAway?: () => void;
}) {
  const scrollRef = useRef<HTMLDivElement>(null);
  const lastTop = useRef(0);
  const virtualizer = useVirtualizer({
    count: steps.length,
    getScrollElement: () => scrollRef.current,
    estimateSize: () => 64,
    overscan: 6,
  });
  const count = steps.length;
  useEffect(() => {
    if (follow && count > 0) virtualizer.scrollToIndex(count - 1, { align: "end" });
  }, [follow, count, virtualizer]);

  const onScroll = () => {
    const el = scrollRef.current;
    if (!el) return;
    const top = el.scrollTop;
    const up = top < lastTop.current - 1;
    lastTop.current = top;
    // Only a move up that leaves the end is the reader's: following scrolls
    // down, and a list that shrank on measuring clamps to the end.
    if (follow && up && el.scrollHeight - top - el.clientHeight > AT_END) onScrollAway?.();
  };

  return (
    <div
      className="transcript"
      ref={scrollRef}
      onScroll={onScroll}
      data-testid="transcript"
      data-steps={steps.length}
      tabIndex={0}
      aria-label="Transcript"
    >
      <div style={{ height: virtualizer.getTotalSize(), position: "relative" }}>
        {virtualizer.getVirtualItems().map((item) => (
          <div
            key={item.key}
            data-index={item.index}
            ref={virtualizer.measureElement}
            className="step"
            style={{ position: "absolute", top: 0, left: 0, right: 0, transform: `translateY(${item.start}px)` }}
          >
            <Step step={steps[item.index]} />
          </div>
        ))}
      </div>
    </div>
  );
}
