// What only an operator (or admin) may use: a viewer sees `fallback`
// instead, or nothing; until the server has said who is signed in, neither
// shows. The server refuses a viewer's change either way; this keeps the
// buttons that would fail off the screen.
import type { ReactNode } from "react";
import { useCanOperate, useMe } from "@/api/account";

export function OperatorOnly({ children, fallback = null }: { children: ReactNode; fallback?: ReactNode }) {
  const me = useMe();
  const canOperate = useCanOperate();
  if (!me.data) return null;
  return <>{canOperate ? children : fallback}</>;
}
